# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.utils.constants.Mode (a connector's direction)."""

from enum import Enum


class Mode(str, Enum):
    ACTIVE = "ACTIVE"
    PASSIVE = "PASSIVE"
