-- Largest micro-batch that fits one model, per GPU type, GPU count and sequence length (the best layout of each cell).
-- params:  $method  VARCHAR  training method (as queries name it), or NULL for any
--          $model   VARCHAR  model key
-- returns: one row per (model, gpu, n_gpus, seq_len) with a valid layout: max_micro_batch (NULL when nothing fits),
--          tokens_per_gpu (max_micro_batch * seq_len), and at that micro-batch the layout with the most headroom
--          (tp, pp, zero_stage, checkpointing, device_peak_gib, headroom_gib)
WITH layouts AS (
    SELECT *
    FROM sweep
    WHERE valid
      AND model = $model
      AND ($method IS NULL OR $method = training_method(precision, optimizer, framework, lora_rank, base_quant, offload))
),
cells AS (
    SELECT
        model, gpu, n_gpus, seq_len,
        max(micro_batch) FILTER (WHERE fits)                                AS max_micro_batch,
        -- largest fitting micro-batch first, then the most free memory
        arg_max({'tp': tp, 'pp': pp, 'zero_stage': zero_stage, 'checkpointing': checkpointing,
                 'device_peak_bytes': device_peak_bytes, 'headroom_bytes': capacity_bytes - device_peak_bytes},
                (micro_batch, capacity_bytes - device_peak_bytes, -index)) FILTER (WHERE fits) AS best
    FROM layouts
    GROUP BY ALL
)
SELECT
    model,
    gpu,
    n_gpus,
    seq_len,
    max_micro_batch,
    max_micro_batch * seq_len                                               AS tokens_per_gpu,
    best.tp, best.pp, best.zero_stage, best.checkpointing,
    best.device_peak_bytes / 2^30                                           AS device_peak_gib,
    best.headroom_bytes / 2^30                                              AS headroom_gib
FROM cells
ORDER BY model, gpu, n_gpus, seq_len;
