-- Training methods in the sweep, the most fitting configurations first: the report charts each of them (up to a limit, every kind first).
-- params:  none
-- returns: one row per method: kind ('full', 'LoRA' or 'QLoRA': what is trained, on what base), configurations,
--          valid, fit, fit_share (of valid; NULL without valid rows)
WITH per_axes AS (
    -- group on the raw columns first: the method string is then built once per method, not once per row
    SELECT
        precision, optimizer, framework, lora_rank, base_quant, offload,
        count(*)                                                            AS configurations,
        count(*) FILTER (WHERE valid)                                       AS valid,
        count(*) FILTER (WHERE valid AND fits)                              AS fit
    FROM sweep
    GROUP BY ALL
)
SELECT
    training_method(precision, optimizer, framework, lora_rank, base_quant, offload)  AS method,
    CASE WHEN lora_rank = 0 THEN 'full' WHEN base_quant = 'nf4' THEN 'QLoRA' ELSE 'LoRA' END AS kind,
    configurations,
    valid,
    fit,
    fit / nullif(valid, 0)                                                  AS fit_share
FROM per_axes
ORDER BY fit DESC, method;
