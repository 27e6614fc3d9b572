#!/bin/sh
# The depth study's run labelling (diverged, stalled, trained, failed) on synthetic metrics.
exec python3 scripts/depth_study.py --self-test
