"""Where a check's seconds go on a 6.4 GB KernelBench input: old host copy vs fingerprint, and the rest."""
import json, sys, time, secrets, os
import torch
from accelopt.tools.harness import correctness
out = {}
def t(name, fn, n=1):
    torch.cuda.synchronize(); s = time.perf_counter()
    for _ in range(n): r = fn()
    torch.cuda.synchronize(); out[name] = round((time.perf_counter() - s) / n, 4); print(name, out[name], flush=True); return r
x = t("randn_6.4GB", lambda: torch.randn(4096, 393216, device="cuda"))
host = t("old_kept_host_copy", lambda: x.to("cpu", copy=True))
t("old_identical_vs_host", lambda: correctness.identical(torch, x, host))
del host
fp = t("fingerprint_first", lambda: correctness.fingerprint(torch, x, secrets.randbits(62)))
fp = t("fingerprint", lambda: correctness.fingerprint(torch, x, secrets.randbits(62)), 3)
t("identical_vs_fingerprint", lambda: correctness.identical(torch, x, fp))
t("clone", lambda: x.clone(), 3)
y = x * 1.0000001
t("allclose_rule", lambda: correctness.evaluator("allclose", 1e-2, 1e-2, None)(torch, [y], [x], "w"))
del y
from torch.profiler import profile, ProfilerActivity
def prof():
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        torch.nn.functional.gelu(x[:1024]); torch.cuda.synchronize()
    return p
t("profiler_first", prof); t("profiler", prof, 3)
out["device"] = torch.cuda.get_device_name()
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "probe_fp.json"), "w"), indent=1)
