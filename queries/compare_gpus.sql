-- GPU types side by side for one model: the fewest GPUs that fit, the largest micro-batch and the most memory to spare at that count (usable - device peak), and its $/h.
-- params:  $model    VARCHAR  model key
--          $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (method, gpu) that fits: hbm_gib, min_gpus, max_micro_batch and spare_gib at
--          min_gpus, usd_per_gpu_hour, fleet_usd_per_hour (NULL without a catalog price), price_source, price_date
WITH at_fewest AS (
    SELECT
        model,
        training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
        gpu,
        min(n_gpus)                                                         AS min_gpus,
        -- the row at the fewest GPUs with the largest micro-batch / the most free memory
        arg_min(micro_batch, (n_gpus, -micro_batch))                        AS max_micro_batch,
        arg_min(spare_bytes(usable_bytes, device_peak_bytes), (n_gpus, -spare_bytes(usable_bytes, device_peak_bytes))) AS spare_bytes
    FROM fitting_rows($model, NULL, $seq_len)
    GROUP BY ALL
)
SELECT
    model, method, gpu,
    g.hbm_bytes / 2^30                                                      AS hbm_gib,
    min_gpus,
    max_micro_batch,
    spare_bytes / 2^30                                                   AS spare_gib,
    g.usd_per_hour                                                          AS usd_per_gpu_hour,
    min_gpus * g.usd_per_hour                                               AS fleet_usd_per_hour,
    g.price_source,
    g.price_date
FROM at_fewest
LEFT JOIN gpus AS g USING (gpu)
ORDER BY method, min_gpus, fleet_usd_per_hour NULLS LAST, gpu;
