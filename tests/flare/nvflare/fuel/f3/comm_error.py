# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.comm_error.CommError (a code string and a message)."""


class CommError(Exception):
    ERROR = "ERROR"
    NOT_READY = "NOT_READY"
    BAD_DATA = "BAD_DATA"
    BAD_CONFIG = "BAD_CONFIG"
    CLOSED = "CLOSED"
    NOT_SUPPORTED = "NOT_SUPPORTED"
    TIMEOUT = "TIMEOUT"

    def __init__(self, code: str, message=None):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self):
        return f"Code: {self.code} Error: {self.message}" if self.message else f"Code: {self.code}"
