-- The GPU type and model a report's single-model charts show: among the GPU types on which the most models fit, the one of median memory; and the median-size model that fits on it.
-- params:  $method  VARCHAR  training method (as queries name it), or NULL for any
--          $model   VARCHAR  model to show, or NULL to pick the median-size one
--          $gpu     VARCHAR  GPU type to show, or NULL to pick one
-- returns: one row (none when nothing fits, or $model never fits the GPU): gpu, capacity_gib, model, n_params,
--          min_gpus (fewest GPUs of that type that fit the model), layout_gpus (the count, from min_gpus up, with the
--          most distinct valid (zero_stage, tp, checkpointing) settings: where they can be compared),
--          models_that_fit (on that GPU type)
WITH fitting AS (
    SELECT model, gpu, n_gpus, capacity_bytes
    FROM sweep
    WHERE valid AND fits
      AND ($method IS NULL OR $method = training_method(precision, optimizer, framework, lora_rank, base_quant, offload))
),
per_gpu AS (
    SELECT
        gpu,
        count(DISTINCT model)                                               AS models_that_fit,
        min(capacity_bytes)                                                 AS capacity_bytes,
        bool_or(model = $model)                                             AS fits_model
    FROM fitting
    GROUP BY ALL
),
gpu_candidates AS (
    SELECT
        *,
        row_number() OVER (ORDER BY capacity_bytes, gpu)                    AS capacity_rank,
        count(*) OVER ()                                                    AS n_gpus_types
    FROM per_gpu
    WHERE ($gpu IS NULL OR gpu = $gpu)
      AND ($model IS NULL OR fits_model)
      -- the GPU types on which the most models fit
      AND models_that_fit = (SELECT max(models_that_fit) FROM per_gpu
                             WHERE ($gpu IS NULL OR gpu = $gpu) AND ($model IS NULL OR fits_model))
),
gpu_pick AS (
    -- of those, the median memory: neither the roomiest card nor the tightest
    SELECT gpu, capacity_bytes, models_that_fit
    FROM gpu_candidates
    WHERE capacity_rank = (n_gpus_types + 1) // 2
),
per_model AS (
    SELECT
        f.model,
        m.n_params,
        min(f.n_gpus)                                                       AS min_gpus
    FROM fitting AS f
    JOIN gpu_pick AS g USING (gpu)
    LEFT JOIN models AS m USING (model)
    GROUP BY ALL
),
ranked AS (
    SELECT
        *,
        row_number() OVER (ORDER BY n_params NULLS LAST, model)             AS size_rank,
        count(*) OVER ()                                                    AS n_models
    FROM per_model
),
model_pick AS (
    SELECT r.*
    FROM ranked AS r
    WHERE CASE WHEN $model IS NULL THEN r.size_rank = (r.n_models + 1) // 2 ELSE r.model = $model END
),
layout_choice AS (
    -- the GPU count at which ZeRO, TP and recompute can be compared: the most distinct valid settings of the
    -- three, at the fewest GPUs that fit (at one GPU, say, only ZeRO-0 and tp 1 exist)
    SELECT s.n_gpus
    FROM sweep AS s
    JOIN model_pick AS p ON s.model = p.model AND s.n_gpus >= p.min_gpus
    JOIN gpu_pick AS g ON s.gpu = g.gpu
    WHERE s.valid
      AND ($method IS NULL OR $method = training_method(s.precision, s.optimizer, s.framework, s.lora_rank,
                                                          s.base_quant, s.offload))
    GROUP BY s.n_gpus
    ORDER BY count(DISTINCT (s.zero_stage, s.tp, s.checkpointing)) DESC, s.n_gpus
    LIMIT 1
)
SELECT
    g.gpu,
    g.capacity_bytes / 2^30                                                 AS capacity_gib,
    p.model,
    p.n_params,
    p.min_gpus,
    (SELECT n_gpus FROM layout_choice)                                      AS layout_gpus,
    g.models_that_fit
FROM model_pick AS p
CROSS JOIN gpu_pick AS g
ORDER BY p.model;
