-- What ZeRO, TP, PP and recompute buy, for the report: one model on one GPU type at one GPU count, the device peak of every (pp, zero_stage, tp, checkpointing) at one workload, the largest that fits.
-- params:  $method  VARCHAR  training method (as queries name it), or NULL for any
--          $model   VARCHAR  model key
--          $gpu     VARCHAR  GPU key
--          $n_gpus  BIGINT   GPU count, or NULL for the fewest GPUs at which a layout fits
-- returns: one row per (pp, zero_stage, tp, checkpointing) with a valid layout at the workload: model, gpu, n_gpus,
--          micro_batch and seq_len (the workload: the most tokens per micro-batch at which any layout fits, else the
--          fewest), min_device_peak_gib (the axes not listed, e.g. attention, at their lowest peak), usable_gib
--          (capacity less headroom), any_fits, fitting (count), top_pp (the sweep's largest pp here)
WITH candidates AS (
    SELECT *
    FROM sweep
    WHERE valid
      AND model = $model
      AND gpu = $gpu
      AND ($method IS NULL OR $method = training_method(precision, optimizer, framework, lora_rank, base_quant, offload))
),
gpu_count AS (
    SELECT coalesce($n_gpus, min(n_gpus) FILTER (WHERE fits), min(n_gpus)) AS n
    FROM candidates
),
layouts AS (
    SELECT c.*
    FROM candidates AS c, gpu_count
    WHERE c.n_gpus = gpu_count.n
),
workload AS (
    -- the largest fitting micro-batch x sequence (ties: the longer sequence); when none fits, the smallest
    SELECT coalesce(
               arg_max({'micro_batch': micro_batch, 'seq_len': seq_len}, (micro_batch * seq_len, seq_len)) FILTER (WHERE fits),
               arg_min({'micro_batch': micro_batch, 'seq_len': seq_len}, (micro_batch * seq_len, seq_len))) AS w
    FROM layouts
),
lowest AS (
    SELECT
        l.pp, l.zero_stage, l.tp, l.checkpointing,
        min(l.device_peak_bytes)                                            AS device_peak_bytes,
        arg_min(l.usable_bytes, l.device_peak_bytes)                        AS usable_bytes,
        bool_or(l.fits)                                                     AS any_fits,
        count(*) FILTER (WHERE l.fits)                                      AS fitting
    FROM layouts AS l, workload
    WHERE l.micro_batch = workload.w.micro_batch AND l.seq_len = workload.w.seq_len
    GROUP BY ALL
)
SELECT
    $model                                                                  AS model,
    $gpu                                                                    AS gpu,
    gpu_count.n                                                             AS n_gpus,
    workload.w.micro_batch                                                  AS micro_batch,
    workload.w.seq_len                                                      AS seq_len,
    pp, zero_stage, tp, checkpointing,
    device_peak_bytes / 2^30                                                AS min_device_peak_gib,
    usable_bytes / 2^30                                                     AS usable_gib,
    any_fits,
    fitting,
    max(pp) OVER ()                                                         AS top_pp
FROM lowest, workload, gpu_count
ORDER BY pp, zero_stage, tp, checkpointing;
