# SPDX-License-Identifier: Apache-2.0
# admin.py — FLARE's side of tests/e2e/test_site.sh: makes the test's jobs with FLARE's own job
# API and talks to the FLARE server through FLARE's admin API (nvflare.fuel.flare_api), as the
# project admin of the POC startup kit.
#   admin.py job DIR NAME MODE ROUNDS SLEEP...  export DIR/NAME, a NumPy FedAvg job: a FedJob with
#                                             FedAvg + NPModelPersistor on the server and a
#                                             ScriptRunner running tests/site/train.py on site-1,
#                                             launch_external_process = (MODE == external);
#                                             the job "ext" starts from $SITE_MODEL_NPY if set
#   admin.py submit KIT DIR                   submit the job folder DIR, print the job id
#   admin.py wait KIT JOB SECS                wait for the job's end, print its status
#   admin.py abort KIT JOB                    abort_job
#   admin.py status KIT JOB                   print the job's status now
#   admin.py logs KIT JOB SITE FILE           print what get_job_logs gives for SITE's FILE
#   admin.py shutdown KIT                     shut the server and its clients down
# KIT is the admin's startup kit folder (the one holding startup/); the user is its folder name.
import builtins
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def make_job(out, name, mode, rounds, sleep):
    from nvflare.app_common.np.np_model_persistor import NPModelPersistor
    from nvflare.app_common.workflows.fedavg import FedAvg
    from nvflare.fuel.utils.constants import FrameworkType
    from nvflare.job_config.api import FedJob
    from nvflare.job_config.script_runner import ScriptRunner

    job = FedJob(name=name, min_clients=1)
    # SITE_MODEL_NPY (bench/flare.sh): the ext job's initial model, a .npy file on this machine
    ckpt = os.environ.get("SITE_MODEL_NPY") if name == "ext" else None
    job.to_server(NPModelPersistor(model=[0.0, 0.0, 0.0, 0.0], source_ckpt_file_full_name=ckpt), id="persistor")
    job.to_server(FedAvg(num_clients=1, num_rounds=int(rounds), persistor_id="persistor"))
    # the script named relative to this folder: FLARE 2.8.1's command is custom/<script> as given
    os.chdir(HERE)
    job.to(ScriptRunner(script="train.py", script_args=str(sleep),
                        launch_external_process=(mode == "external"), framework=FrameworkType.NUMPY), "site-1")
    out = os.path.abspath(out)
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    job.export_job(out)
    print(os.path.join(out, name))


def session(kit):
    from nvflare.fuel.flare_api.flare_api import new_secure_session

    kit = os.path.abspath(kit)
    return new_secure_session(os.path.basename(kit), kit, timeout=30)


def main(argv):
    global print
    # the answer alone on stdout: FLARE's own messages ("Connecting to FLARE ...") go to stderr
    out = sys.stdout
    sys.stdout = sys.stderr
    print = lambda *a: builtins.print(*a, file=out, flush=True)  # noqa: E731
    cmd = argv[1]
    if cmd == "job":  # job DIR NAME MODE ROUNDS SLEEP [NAME MODE ROUNDS SLEEP ...]
        for i in range(3, len(argv), 4):
            make_job(argv[2], *argv[i:i + 4])
        return
    s = session(argv[2])
    try:
        if cmd == "submit":
            print(s.submit_job(argv[3]))
        elif cmd == "status":
            print(s.get_job_meta(argv[3]).get("status"))
        elif cmd == "wait":
            deadline = time.time() + float(argv[4])
            while True:
                status = s.get_job_meta(argv[3]).get("status", "")
                if status.startswith("FINISHED") or time.time() > deadline:
                    print(status)
                    return
                time.sleep(0.5)
        elif cmd == "abort":
            s.abort_job(argv[3])
        elif cmd == "logs":
            print(s.get_job_logs(argv[3], target=argv[4], log_file_name=argv[5]))
        elif cmd == "shutdown":
            s.shutdown("all")
        else:
            sys.exit(f"admin.py: unknown command {cmd}")
    finally:
        s.close()


if __name__ == "__main__":
    main(sys.argv)
