"""sentinel-remedy: acts on a P0 the way the RFC's table says (isolate the node, bring the job back from its
checkpoint), through a scheduler backend (Slurm now; Kubernetes next, docs/REMEDY.md)."""
