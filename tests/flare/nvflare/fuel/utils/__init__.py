# SPDX-License-Identifier: Apache-2.0
"""Test stand-in for the FLARE package of the same name (tests/flare/README.md)."""
