# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.common.exit_codes (the values FLARE defines)."""


class ProcessExitCode:
    EXCEPTION = 101
    UNSAFE_COMPONENT = 102
    CONFIG_ERROR = 103
    INFRASTRUCTURE_ERROR = 104
