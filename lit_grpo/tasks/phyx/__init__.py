"""The physical-reasoning paper on PhyX: reader and writer, physics generators, rewards (format, accuracy,
rubric, judge, PhyX's official scorer), units and the experiments that make its table."""
