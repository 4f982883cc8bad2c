-- Table macros over the `sweep` view that several queries share; engine/dataset/views.py runs this file once
-- the view exists. Each takes the queries' filters as arguments (NULL: any), so DuckDB filters before it groups.

-- The rows that can run and fit, narrowed by the filters most questions take (NULL: any): fits.sql, min_gpus.sql,
-- compare_gpus.sql, frontier.sql, cheapest_fleet.sql and the macros below.
CREATE OR REPLACE MACRO fitting_rows(model_key, gpu_key, at_seq_len) AS TABLE
    SELECT *
    FROM sweep
    WHERE valid AND fits
      AND (model_key IS NULL OR model = model_key)
      AND (gpu_key IS NULL OR gpu = gpu_key)
      AND (at_seq_len IS NULL OR seq_len = at_seq_len);

-- The fewest-GPU layout that fits, per model, training method and GPU type (ties: the lower device peak, then
-- the first in sweep order), with every memory component at its peak: breakdown.sql, report_breakdown.sql.
CREATE OR REPLACE MACRO fewest_gpu_layouts(model_key, gpu_key, at_n_gpus, method_name) AS TABLE
    SELECT
        model,
        training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
        gpu,
        arg_min({'n_gpus': n_gpus, 'dp': dp, 'tp': tp, 'pp': pp, 'cp': cp, 'ep': ep, 'sp': sp,
                 'zero_stage': zero_stage, 'checkpointing': checkpointing,
                 'micro_batch': micro_batch, 'seq_len': seq_len, 'peak_phase': peak_phase,
                 'weight_bytes': weight_bytes, 'peak_grad_bytes': peak_grad_bytes,
                 'peak_optimizer_bytes': peak_optimizer_bytes, 'activation_bytes': activation_bytes,
                 'temp_bytes': temp_bytes, 'allocator_slack_bytes': allocator_slack_bytes,
                 'overhead_bytes': overhead_bytes, 'device_peak_bytes': device_peak_bytes,
                 'capacity_bytes': capacity_bytes, 'usable_bytes': usable_bytes},
                (n_gpus, device_peak_bytes, index))                         AS c
    FROM fitting_rows(model_key, gpu_key, NULL)
    WHERE (at_n_gpus IS NULL OR n_gpus = at_n_gpus)
      AND (method_name IS NULL OR training_method(precision, optimizer, framework, lora_rank, base_quant, offload) = method_name)
    GROUP BY ALL;

-- Heat-map cells: per GPU type, model, training method and GPU count over valid layouts, whether any fits, how
-- many, the most memory free at the peak, and how far the closest layout misses: feasibility_map.sql,
-- report_feasibility_map.sql.
CREATE OR REPLACE MACRO feasibility_cells(at_seq_len, method_name) AS TABLE
    SELECT
        gpu,
        model,
        training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
        n_gpus,
        min(capacity_bytes)                                                 AS capacity_bytes,
        bool_or(fits)                                                       AS any_fits,
        count(*) FILTER (WHERE fits)                                        AS fitting,
        max(spare_bytes(usable_bytes, device_peak_bytes)) FILTER (WHERE fits) AS best_spare_bytes,
        min(-spare_bytes(usable_bytes, device_peak_bytes))                   AS least_miss_bytes
    FROM sweep
    WHERE valid
      AND (at_seq_len IS NULL OR seq_len = at_seq_len)
      AND (method_name IS NULL OR training_method(precision, optimizer, framework, lora_rank, base_quant, offload) = method_name)
    GROUP BY ALL;

-- The largest value of one workload axis ('micro_batch' or 'seq_len') that fits, per model, method, GPU type,
-- layout and value of the other workload axis (`held`), with the device peak and the memory free at it:
-- max_micro_batch.sql, max_seq_len.sql.
CREATE OR REPLACE MACRO largest_that_fits(axis, model_key, gpu_key, held_value) AS TABLE
    WITH fitting AS (
        SELECT
            *,
            CASE axis WHEN 'micro_batch' THEN micro_batch ELSE seq_len END  AS grown,
            CASE axis WHEN 'micro_batch' THEN seq_len ELSE micro_batch END  AS held
        FROM fitting_rows(model_key, gpu_key, NULL)
    )
    SELECT
        model,
        training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
        gpu, n_gpus, tp, pp, cp, ep, sp, zero_stage, checkpointing, held,
        max(grown)                                                          AS largest,
        arg_max(device_peak_bytes, (grown, -device_peak_bytes))             AS device_peak_bytes,
        arg_max(spare_bytes(usable_bytes, device_peak_bytes), (grown, -device_peak_bytes)) AS spare_bytes
    FROM fitting
    WHERE held_value IS NULL OR held = held_value
    GROUP BY ALL;
