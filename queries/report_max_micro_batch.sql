-- Largest micro-batch that fits one model, per GPU type, GPU count and sequence length (the best layout of each cell).
-- params:  $method  VARCHAR  training method (as queries name it), or NULL for any
--          $model   VARCHAR  model key
-- returns: one row per (model, gpu, n_gpus, seq_len) with a valid layout: max_micro_batch (NULL when nothing fits),
--          top_micro_batch (the largest micro-batch the sweep tried: a cell at it may fit a larger one),
--          tokens_per_gpu (max_micro_batch * seq_len), and at that micro-batch the layout with the most memory to
--          spare (tp, pp, zero_stage, checkpointing, device_peak_gib, spare_gib = usable - device peak)
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
        -- largest fitting micro-batch first, then the most memory to spare
        arg_max({'tp': tp, 'pp': pp, 'zero_stage': zero_stage, 'checkpointing': checkpointing,
                 'device_peak_bytes': device_peak_bytes, 'spare_bytes': usable_bytes - device_peak_bytes},
                (micro_batch, usable_bytes - device_peak_bytes, -index)) FILTER (WHERE fits) AS best
    FROM layouts
    GROUP BY ALL
)
SELECT
    model,
    gpu,
    n_gpus,
    seq_len,
    max_micro_batch,
    (SELECT max(micro_batch) FROM layouts)                                  AS top_micro_batch,
    max_micro_batch * seq_len                                               AS tokens_per_gpu,
    best.tp, best.pp, best.zero_stage, best.checkpointing,
    best.device_peak_bytes / 2^30                                           AS device_peak_gib,
    best.spare_bytes / 2^30                                                 AS spare_gib
FROM cells
ORDER BY model, gpu, n_gpus, seq_len;
