# SPDX-License-Identifier: Apache-2.0
# train.py — the trainer of tests/e2e/test_site.sh's jobs: a stock FLARE Client API script
# (nvflare.client: init / receive / send), NumPy only. Each round adds 1 to every weight and
# sleeps SLEEP seconds (argv[1], default 0) so that a test can catch the job mid-run; it
# writes its environment to train_env.json in its working directory (the job's app folder).
import json
import os
import sys
import time

import numpy as np

import nvflare.client as flare


def main():
    sleep = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    flare.init()
    # its environment, for the suite to compare with a stock trainer's (cwd: the job's app folder)
    with open("train_env.json", "w") as f:
        json.dump(dict(os.environ), f, indent=1)
    print(f"train.py: site {flare.get_site_name()} job {flare.get_job_id()} pid {os.getpid()}", flush=True)
    while flare.is_running():
        model = flare.receive()
        if model is None:
            break
        params = {k: np.asarray(v, dtype=np.float32) + 1.0 for k, v in model.params.items()}
        time.sleep(sleep)
        print(f"train.py: round {model.current_round} done", flush=True)
        flare.send(flare.FLModel(params=params, metrics={"accuracy": 0.5}, meta={"NUM_STEPS_CURRENT_ROUND": 1}))


if __name__ == "__main__":
    main()
