-- How big the sweep is and how much of it fits: one row of counts for a report's text.
-- params:  none
-- returns: one row: configurations (rows in the dataset; a --feasible-only sweep keeps only fitting ones),
--          valid, fit, fit_share (of valid), models, gpus, models_that_fit, gpus_that_fit, max_n_gpus
SELECT
    count(*)                                                                AS configurations,
    count(*) FILTER (WHERE valid)                                           AS valid,
    count(*) FILTER (WHERE valid AND fits)                                  AS fit,
    count(*) FILTER (WHERE valid AND fits) / nullif(count(*) FILTER (WHERE valid), 0) AS fit_share,
    count(DISTINCT model)                                                   AS models,
    count(DISTINCT gpu)                                                     AS gpus,
    count(DISTINCT model) FILTER (WHERE valid AND fits)                     AS models_that_fit,
    count(DISTINCT gpu) FILTER (WHERE valid AND fits)                       AS gpus_that_fit,
    max(n_gpus)                                                             AS max_n_gpus
FROM sweep
ORDER BY ALL;
