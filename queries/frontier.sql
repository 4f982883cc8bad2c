-- The largest model (by parameter count) that fits, per GPU type and GPU count: the feasible frontier.
-- params:  $seq_len  BIGINT   tokens per sample, or NULL for any swept length
-- returns: one row per (gpu, n_gpus, method) where some catalog model fits: model, n_params, and its layout
--          with the most memory to spare (layout, dp, tp, pp, cp, ep, sp, zero_stage, checkpointing, micro_batch,
--          seq_len, spare_gib).
--          Models outside the catalog (config.json paths) have no n_params in `models` and are left out.
WITH roomiest_per_model AS (
    SELECT
        gpu, n_gpus, precision, optimizer, framework, lora_rank, base_quant, offload, model,
        arg_max({'dp': dp, 'tp': tp, 'pp': pp, 'cp': cp, 'ep': ep, 'sp': sp, 'zero_stage': zero_stage,
                 'checkpointing': checkpointing, 'micro_batch': micro_batch, 'seq_len': seq_len,
                 'spare_bytes': spare_bytes(usable_bytes, device_peak_bytes)},
                (spare_bytes(usable_bytes, device_peak_bytes), -index))     AS layout
    FROM fitting_rows(NULL, NULL, $seq_len)
    GROUP BY ALL
),
largest AS (
    SELECT
        r.gpu, r.n_gpus, r.precision, r.optimizer, r.framework, r.lora_rank, r.base_quant, r.offload,
        arg_max({'model': r.model, 'n_params': m.n_params, 'layout': r.layout}, (m.n_params, r.model)) AS best
    FROM roomiest_per_model AS r
    JOIN models AS m USING (model)
    GROUP BY ALL
)
SELECT
    gpu,
    n_gpus,
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    best.model,
    best.n_params,
    layout(best.layout.dp, best.layout.tp, best.layout.pp, best.layout.cp, best.layout.ep, best.layout.sp,
           best.layout.zero_stage)                                      AS layout,
    best.layout.dp, best.layout.tp, best.layout.pp, best.layout.cp, best.layout.ep, best.layout.sp,
    best.layout.zero_stage, best.layout.checkpointing,
    best.layout.micro_batch, best.layout.seq_len,
    best.layout.spare_bytes / 2^30                                      AS spare_gib
FROM largest
ORDER BY gpu, method, n_gpus;
