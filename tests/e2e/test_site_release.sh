#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The real-site suite (test_site.sh) on FLARE's newest release: a 2.8.1 POC site (FLARE's own
# server and client parent from ../shared/flare/2.8.1), the launcher installed and configured
# as the README says, its external-process job (ClientAPILauncherExecutor + SubprocessLauncher
# + CellPipe, as FedJob exports it) served by cjrelayd through the pipe dialect: the trainer's
# pipe cell a child of the job's cell, no tensor byte through the client parent.
# FLARE_TREE picks another tree (2.7.2; `make site SITE_TREES="main 2.8.1 2.7.2"` runs them all).
FLARE_TREE=${FLARE_TREE_RELEASE:-2.8.1} exec sh "$(dirname "$0")/test_site.sh"
