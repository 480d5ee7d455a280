"""GPU node probes: the node-side half of GPU Sentinel (issue 7).

A small daemon per GPU node (``sentinel-probe``) that watches NVML (or nvidia-smi), the kernel log (XIDs),
training logs (NCCL watchdog lines) and a progress socket fed by ``host_client.beat``, and reports every
finding once to the gateway's ``POST /api/v1/gpu_event`` (and once more when it clears). See docs/PROBES.md.
"""
