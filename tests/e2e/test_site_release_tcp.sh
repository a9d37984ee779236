#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The real-site suite (test_site.sh) on FLARE's older release over the other transport: a 2.7.2
# POC site provisioned with scheme tcp (stcp on the wire, mutual TLS), its external-process job
# served by cjrelayd through the pipe dialect. test_site_release.sh runs 2.8.1 over FLARE's
# default (http, mutual TLS); make interop runs every tree x scheme x connection security.
FLARE_TREE=${FLARE_TREE_RELEASE:-2.7.2} SITE_SCHEME=${SITE_SCHEME:-tcp} SITE_SECURITY=${SITE_SECURITY:-mtls} \
    exec sh "$(dirname "$0")/test_site.sh"
