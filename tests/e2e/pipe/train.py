# SPDX-License-Identifier: Apache-2.0
# A stock FLARE Client API trainer as a ScriptRunner job runs it (tests/e2e/test_pipe.sh):
# nvflare.client with the release's own code, numpy parameters, +1.0 on every element.
# It prints what the test checks: its environment's launch variables and each round.
import logging
import os
import sys

logging.basicConfig(level=logging.INFO, stream=sys.stderr)

import nvflare.client as flare  # noqa: E402

print("trainer: env CLIENT_API_TYPE=%s NVFLARE_CLIENT_API_BOOTSTRAP=%s"
      % (os.environ.get("CLIENT_API_TYPE"), os.environ.get("NVFLARE_CLIENT_API_BOOTSTRAP")), flush=True)
flare.init()
print("trainer: site %s job %s" % (flare.get_site_name(), flare.get_job_id()), flush=True)
while flare.is_running():
    model = flare.receive()
    if model is None:
        break
    print("trainer: round %s: %d tensors" % (model.current_round, len(model.params)), flush=True)
    params = {k: v + 1.0 for k, v in model.params.items()}
    flare.log("round", float(model.current_round or 0), flare.AnalyticsDataType.SCALAR)
    flare.send(flare.FLModel(params=params, params_type="FULL", metrics={"loss": 0.5}))
print("trainer: done", flush=True)
