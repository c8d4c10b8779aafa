"""``tinytrain plan``: contribution analysis and the search of a sparse-update plan under an SRAM budget.

As in MCUNetV3 ("On-Device Training Under 256KB Memory", Lin et al. 2022, section 3.2):

1. measure (measure.py) the accuracy gain of each update option alone, over a baseline that updates only the
   classifier (the last layer's weights and bias): the biases of the last k layers (Δb[k]) and the weights of
   layer i at ratio r of its output channels (Δw[i, r]), each by a short fine-tune with the device arithmetic
   on the host C engine; the results are cached on disk (resumable, budget independent);
   Gains within the noise of repeated baseline runs count as 0 (noise.py);
2. search (evolution.py, exact.py) the plan maximizing Δb[k] + Σ_i Δw[i, r_i] subject to the true peak SRAM
   of its training step (training.device_step.device_step -> memory_report, what
   ``tinytrain compile --plan`` reports; memory.py caches it) being within the budget;
3. (not in the paper: gains do not add up) train the finalists — every preset that fits (candidates.py) and the
   searches' proposals, and plans keeping other remainder bits — with the recipe (every rung under the recipe's lr
   schedule over its own steps) and keep the best measured one (halving.py);
4. (not in the paper) train every finalist at full length: the reference ranking each rung's Spearman correlation
   is reported against, with the noise floor at that length (rank.py).

run.py puts the stages together (``tinytrain plan``, ``tinytrain.plan``); executors.py runs the fine-tunes of
stages 1 and 3 in this process, in forked workers or as Ray tasks, with the same results.
"""

from tinytrain.search.space import Choice, Space

__all__ = ["Choice", "Space"]
