# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3, FLARE's communication layer (only what a comm driver needs)."""
