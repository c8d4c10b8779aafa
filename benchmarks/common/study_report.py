"""The Markdown table of a transfer study's result (transfer_study.py: Fashion-MNIST, or VWW with --task vww)."""

from __future__ import annotations

import json


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def _data_text(r: dict) -> tuple[str, str]:
    """The title and the sentence on the data of a study's table."""
    st = r["study"]
    if st.get("task") == "vww":
        return ("# VWW study: person / no person on ImageNet MobileNetV1-0.25 (int8, on-device training arithmetic)",
                f"`python benchmarks/transfer_study.py --task vww --fresh` ({r['seconds'] / 60:.0f} min on "
                f"{r['machine']['cpus']} cores, {st['workers']} workers). Model `{st['model']}` + a new 2-class head; "
                f"data `{st['train']}` (800 images, 96x96, half with a person): {r['n_train']} training images, "
                f"{r['n_test']} held out as the test set (stratified, `--held-out {st['held_out']:g} --split-seed 0`, "
                "looked at only for this table; one test image is "
                f"{100 / r['n_test']:.1f} points). Nothing was chosen on the test images: the plans and fp32 full "
                "fine-tuning's lr, and the recipe, on a 30 % validation split of the training images.")
    test = ("the official 10,000 test images, all of them" if r["n_test"] == 10000 else
            f"a stratified subset of {r['n_test']} of the official test images: a quick check, not the study")
    return ("# Transfer study: Fashion-MNIST on ImageNet MobileNetV1-0.25 (int8, on-device training arithmetic)",
            f"`python benchmarks/transfer_study.py --fresh` ({r['seconds'] / 60:.0f} min on {r['machine']['cpus']} "
            f"cores, {st['workers']} workers). Model `{st['model']}` + a new 10-class head; training data "
            f"`{st['train']}` ({r['n_train']} images: a stratified subset of the 60,000, seed 0), test `{st['test']}` "
            f"({test}, looked at only for this table). Nothing was chosen on the test images: the plans (and with "
            "`--choose-recipe` the recipe) on a 30 % validation split of the training subset.")


def _last_rung_noise(check: dict) -> str:
    """The rank check's gains against the noise of what they compare: single runs, and the last rung's means of
    --final-seeds seeds."""
    n, z, sd = check.get("final_seeds", 1), check["noise_floor"]["z"], check["noise_floor"]["gain_sd"]
    if n == 1:
        return f"{check['gains_above_noise']} of {check['finalists']} gains above {z:g} x {_pct(sd)}"
    return (f"{check['gains_above_noise']} of {check['finalists']} gains above {z:g} sd of their noise ({_pct(sd)} "
            f"for single runs, {_pct(sd / n ** 0.5)} for the last rung's means of {n} seeds: "
            f"{check['last_rung_above_noise']} of its {check['last_rung_finalists']})")


def _seeds(measured: dict) -> str:
    return f" × {measured['seeds']} seeds" if measured.get("seeds", 1) > 1 else ""


def markdown(r: dict, wide_model: str, wide_size: int) -> str:
    """The study's table, reading and commands (``wide_model`` at ``wide_size``: the stronger backbone's rows)."""
    rec = r["recipe"]["chosen"]
    title, data = _data_text(r)
    lines = [
        title,
        "",
        data,
        "",
        f"Recipe ({r['recipe'].get('source', 'chosen on the validation split, see below')}): lr {rec['lr']:g}, "
        f"bias lr {rec['bias_lr']:g}, head lr "
        f"{rec['head_lr']:g}, {rec['epochs']} epoch{'s' * (rec['epochs'] != 1)}, "
        + ("constant lrs" if rec["schedule"] == "constant" else
           f"{rec['schedule']} lr schedule ({100 * rec['warmup']:g} % warm-up)")
        + f", batch-1 SGD, QAS, stochastic rounding; the classifier-only row at its own best lr, "
        f"{rec['classifier_only_lr']:g}.",
        "",
        "| row | test accuracy (95 % CI) | vs classifier-only (paired, 95 % CI) | peak SRAM |",
        "|---|---|---|---|",
    ]
    for name, row in r["rows"].items():
        peak = f"{row['peak_sram_bytes'] / 1024:.1f} KB" if "peak_sram_bytes" in row else "n/a (fp32, unlimited)"
        same = f" (= {row['same_as']}: the same run)" if "same_as" in row else ""
        lines.append(f"| {name}{same} | {_pct(row['accuracy'])} ± {_pct(row['ci95'])} | "
                     f"{100 * row['vs_classifier_only']:+.1f} ± {_pct(row['vs_classifier_only_ci95'])} | {peak} |")
    lines += ["", f"`MobileNetV1-0.5 @{wide_size}` rows: `{wide_model}` (ImageNet, 160x160) run at `--input-size "
              f"{wide_size}` with a new {r['study']['new_head']}-class head, the plan search's presets that fit 256 KB "
              "(not searched), the same recipe; paired against the MobileNetV1-0.25 classifier-only row on the same "
              "test images."]
    fp32 = r["rows"]["fp32 full fine-tuning (PyTorch)"]
    source = fp32.get("lr_source", "chosen on the validation split")
    lines += ["", f"fp32 full fine-tuning: {fp32['recipe']} (Adam's lr {source}: "
              + ", ".join(f"lr {lr} {_pct(a)} %" for lr, a in fp32["validation"].items()) + ")."]
    lines += [f"Device = fp32: `{row['device_row']}` on the device minus its twin ({row['recipe']}): "
              f"{100 * row['device_minus_twin']:+.1f} ± {_pct(row['device_minus_twin_ci95'])} points (paired)."
              for row in r["rows"].values() if "device_row" in row]
    lines += ["", "Searched plan against the best preset that fits the same budget (test set, paired):", ""]
    for b, v in r["budgets"].items():
        lines.append(f"- {b}: searched (chose `{v['chosen']}`, {v['searched_peak_sram_bytes'] / 1024:.1f} KB) "
                     f"minus {v['best_preset']}: {100 * v['searched_minus_best_preset']:+.1f} ± {_pct(v['ci95'])} "
                     "points")
    lines += ["", "Finalists of each search (validation split; predicted = the additive gain model's sum of "
              "single-option gains, measured = trained, at full length (the rank check; without it: at the last "
              "rung they reached)):", ""]
    for b, s in r["searches"].items():
        lines.append(f"**{b}** (noise floor: {s['noise_floor']['repeats']} baseline runs, sd "
                     f"{_pct(s['noise_floor']['run_sd'])} points; validation SE {_pct(s['noise_floor']['binomial_se'])}"
                     f"; {s['seconds']:.0f} s)")
        check = s.get("rank_check")
        if check:
            lines += ["", "Rank check (every finalist trained at full length, the reference ranking): Spearman "
                      + ", ".join(f"{g['steps']} steps "
                                  f"{'n/a' if g['spearman'] is None else format(g['spearman'], '.2f')}"
                                  for g in check["rungs"])
                      + f"; noise floor at full length sd {_pct(check['noise_floor']['run_sd'])} points, "
                      + _last_rung_noise(check) + "."]
        lines += ["", "| finalist | peak SRAM | predicted gain | measured gain | validation accuracy | steps |",
                  "|---|---|---|---|---|---|"]
        for f in s["finalists"]:
            m = {**f["full_length"], "steps": s["measurement"]["finalist_steps"]} if f.get("full_length") else \
                f["measured"][-1]
            pred = "n/a" if f["predicted_gain"] is None else f"{100 * f['predicted_gain']:+.1f}"
            lines.append(f"| {f['name']}{' (chosen)' if f['name'] == s['chosen'] else ''} | "
                         f"{f['peak_sram_bytes'] / 1024:.1f} KB | {pred} | {100 * m['gain']:+.1f} | "
                         f"{_pct(m['accuracy'])} | {m['steps']}{_seeds(m)} |")
        lines.append("")
    lines += ["Recipe measurements (validation accuracy; `choose_recipe` in the script):", "", "```",
              json.dumps({k: v for k, v in r["recipe"].items() if k != "chosen"}, indent=1), "```", "",
              "Commands (each re-runs standalone from the project root):", "", "```"]
    lines += [c["command"] for c in r["commands"] if "command" in c]
    lines += ["```", ""]
    return "\n".join(lines)
