"""`ddpcli slurm`: the sbatch script for a plan's run, as text (sbatch.py). Pure."""
