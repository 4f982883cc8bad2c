-- The fewest GPUs of each type that can train each model, and the layout that does it (the most memory to spare at that count).
-- params:  $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (model, method, gpu) with a fitting configuration: min_gpus, layout, dp, tp, pp, cp, ep, sp,
--          zero_stage, checkpointing, micro_batch, seq_len, device_peak_gib, spare_gib
WITH fewest AS (
    SELECT
        model,
        training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
        gpu,
        -- fewest GPUs, then the lowest device peak, then the first in sweep order: one row, deterministically
        arg_min({'n_gpus': n_gpus, 'dp': dp, 'tp': tp, 'pp': pp, 'cp': cp, 'ep': ep, 'sp': sp,
                 'zero_stage': zero_stage, 'checkpointing': checkpointing, 'micro_batch': micro_batch,
                 'seq_len': seq_len, 'device_peak_bytes': device_peak_bytes, 'usable_bytes': usable_bytes},
                (n_gpus, device_peak_bytes, index))                         AS best
    FROM fitting_rows(NULL, NULL, $seq_len)
    GROUP BY ALL
)
SELECT
    model, method, gpu,
    best.n_gpus                                                             AS min_gpus,
    layout(best.dp, best.tp, best.pp, best.cp, best.ep, best.sp, best.zero_stage) AS layout,
    best.dp, best.tp, best.pp, best.cp, best.ep, best.sp, best.zero_stage, best.checkpointing,
    best.micro_batch, best.seq_len,
    best.device_peak_bytes / 2^30                                           AS device_peak_gib,
    spare_bytes(best.usable_bytes, best.device_peak_bytes) / 2^30          AS spare_gib
FROM fewest
ORDER BY model, method, min_gpus, spare_gib DESC, gpu;
