# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.apis.event_type (the one event the launcher handles)."""


class EventType:
    BEFORE_JOB_LAUNCH = "_before_job_launch"
