"""`ddpcli export`: runs written where people already look (TensorBoard, MLflow, Weights & Biases), aligned by
samples seen.

Pure logic here, like ddpcli.compare (no torch, no rich): which rows are written at which step (`points`), which
params and tags a run carries (`runs`, from compare's own rows: the verdict is compare's, never worked out again),
how a viewer's folder or run is named (`names`) and what an earlier export already wrote (`ledger`). Each viewer has
one small module (`to_tensorboard`, `to_mlflow`, `to_wandb`) that imports its library inside its functions, so
`import ddpcli` and every other command import none of them (tests/test_startup.py).

The step is samples seen (cumulative, every rank that trained rank 0's model, as metrics.jsonl has it and as
compare aligns runs): by optimizer step a 4 x 16 run and a 1 x 16 run are 4x apart, by samples they share a curve.
"""
