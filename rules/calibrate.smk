# Stage 0: calibration (docs/DESIGN.md §3; paper II-B, III-C, IV): measure g(b), beta, the
# prefill model and the reuse rule on the configured backend and write a profile with CIs
# and run ids. It runs in every `make all` (Table VII is always regenerated); predictions,
# channel A, the search and advise read it only with `profile: calibrated` (and the
# exploratory evaluation of a `published` study).


rule calibrate_compile:
    output:
        record=calibration_path("compile.json"),
    log:
        "logs/calibration/compile.log",
    conda:
        "../envs/rbln.yaml"
    resources:
        device=1 if BACKEND.device else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=values("calibration"),
    shell:
        "rearrival study calibrate-compile --config {params.config_file:q}"
        " --values {params.values} --out {output.record:q} > {log:q} 2>&1"


rule calibrate:
    input:
        compiled=calibration_compile_input,
    output:
        profile=calibration_path("profile.yaml"),
        decode=calibration_path("decode_steps.parquet"),
        prefill=calibration_path("prefill.parquet"),
        reuse=calibration_path("reuse.parquet"),
        runs=directory(calibration_path("runs")),
        plans=directory(calibration_path("plans")),
    log:
        "logs/calibration/calibrate.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        device=1 if BACKEND.device else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=values("calibration"),
        compiled=compiled_option,
    shell:
        # every file it writes is named (declared above; the report reads them there)
        "rearrival study calibrate --config {params.config_file:q} --values {params.values}"
        " {params.compiled} --out {output.profile:q} --decode-steps {output.decode:q}"
        " --prefill {output.prefill:q} --reuse {output.reuse:q} --runs {output.runs:q}"
        " --plans {output.plans:q} > {log:q} 2>&1"
