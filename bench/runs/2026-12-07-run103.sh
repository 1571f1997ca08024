#!/bin/bash
# Device run 103: the skinny kernel on the held-out rows of at most 16 rows where the configurator chose the
# tiles kernel and the tiles ran 1.1-1.3x their prediction (0.70-0.88x cuBLAS): is the skinny kernel faster
# there (the tiles' own times: the held-out draws, run 99's cold and run 100's warm, on the same card type)?
# Host: python3 bench/probes/skinny_variants.py --build --tiles-rows (.nova-skinny-variants-tiles.json, carried).
. bench/runs/device_env.sh run103 .nova-cache-run102
OUT=$R timeout 200 python3 bench/probes/skinny_variants.py --tiles-rows 2>&1 | tee $R/skinny_variants_tiles.txt | tail -40
