"""The prediction model: a planned run's step time, throughput and memory from finished runs (predict, and its
parts baseline, compute, comm, contention, target). A leaf: it imports nothing of ddpcli, so `plan --predict-from`,
`launch` (forecast, probe) and the all-reduce probe inside training processes (a worker) can all use it."""
