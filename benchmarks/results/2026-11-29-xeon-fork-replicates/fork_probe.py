"""Can a replicate be a child forked from a process that has already imported, loaded (and compiled)?

    python fork_probe.py PYTHON CHECKPOINT_FOLDER     # PYTHON: an environment's interpreter (torch, transformers)

Three parents, each in a fresh PYTHON process; each forks one child that calls the model once, eager, and exits:
  built     imports, builds ResNet-50 from its config (random init: torch's init kernels run)
  loaded    imports, from_pretrained of CHECKPOINT_FOLDER (safetensors), as a trial process loads
  compiled  as loaded, then torch.compile with inductor freezing, first call, compile workers shut down
A child that has not answered in 60 s is taken for hung: its stack is printed (gdb, where installed), then it is ended
by its PID. No compilebench code: what is asked is what torch's own runtime allows.
"""

import subprocess
import sys

PARENT = r"""
import os, signal, subprocess, sys, time
import torch, transformers
case, folder = sys.argv[1], sys.argv[2]
torch.set_num_threads(2)
started = time.perf_counter()
if case == "built":
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(transformers.ResNetConfig(num_labels=1000)).eval()
else:
    model = transformers.ResNetForImageClassification.from_pretrained(folder, use_safetensors=True).eval()
pixels = torch.ones(1, 3, 224, 224)
call = model
if case == "compiled":
    torch._inductor.config.freezing = True
    call = torch.compile(model)
    with torch.no_grad():
        call(pixel_values=pixels)
    from torch._inductor import async_compile
    async_compile.shutdown_compile_workers()
print(f"{case}: parent ready in {time.perf_counter() - started:.1f} s", flush=True)
child = os.fork()
if child == 0:
    began = time.perf_counter()
    with torch.no_grad():
        call(pixel_values=pixels)
    print(f"{case}: child answered in {time.perf_counter() - began:.2f} s", flush=True)
    os._exit(0)
for _ in range(600):
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        print(f"{case}: child exit status {status}", flush=True)
        break
    time.sleep(0.1)
else:
    print(f"{case}: child hung (no answer in 60 s); its main thread's stack:", flush=True)
    trace = subprocess.run(["gdb", "-p", str(child), "-batch", "-ex", "bt 6"], capture_output=True, text=True)
    print("\n".join(line for line in trace.stdout.splitlines() if line.startswith("#")), flush=True)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    print(f"{case}: child {child} ended by its PID", flush=True)
"""

python, folder = sys.argv[1], sys.argv[2]
for case in ("built", "loaded", "compiled"):
    subprocess.run([python, "-c", PARENT, case, folder], check=True, stderr=subprocess.DEVNULL)
