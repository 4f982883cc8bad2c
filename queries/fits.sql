-- The feasible configurations of one model, best first: fewest GPUs, then the most memory to spare (usable - device peak).
-- params:  $model    VARCHAR  model key
--          $gpu      VARCHAR  GPU key, or NULL for every GPU type
--          $limit    BIGINT   rows to return (>= 1) (default 20)
-- returns: one row per configuration (index), model, method, gpu, n_gpus, dp, tp, pp, cp, ep, sp, zero_stage,
--          checkpointing, micro_batch, seq_len, device_peak_gib, spare_gib (usable - device peak), bottleneck
WITH best AS (
    SELECT *
    FROM fitting_rows($model, $gpu, NULL)
    ORDER BY n_gpus, spare_bytes(usable_bytes, device_peak_bytes) DESC, index
    LIMIT $limit
)
SELECT
    index,
    model,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    gpu, n_gpus, dp, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch, seq_len,
    device_peak_bytes / 2^30                                                AS device_peak_gib,
    spare_bytes(usable_bytes, device_peak_bytes) / 2^30                    AS spare_gib,
    bottleneck
FROM best
ORDER BY n_gpus, spare_gib DESC, index;
