# Stage 0: calibration (SPEC 4, paper II-B, III-C, IV): measure g(b), beta, the prefill
# model and the reuse rule on the configured backend and write a profile with CIs and
# run ids. It runs in every `make all` (Table VII is always regenerated); predictions,
# channel A, the search and advise read it only with `profile: calibrated`.


rule calibrate_compile:
    output:
        "results/calibration/compile.json",
    log:
        "logs/calibration/compile.log",
    conda:
        "../envs/rbln.yaml"
    resources:
        device=1 if REAL_DEVICE else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=constant("calibration"),
    shell:
        "rearrival calibrate-compile --config {params.config_file:q} --out {output:q}"
        " > {log:q} 2>&1"


rule calibrate:
    input:
        compiled=calibration_compile_input,
    output:
        profile="results/calibration/profile.yaml",
        decode="results/calibration/decode_steps.parquet",
        prefill="results/calibration/prefill.parquet",
        reuse="results/calibration/reuse.parquet",
        runs=directory("results/calibration/runs"),
        plans=directory("results/calibration/plans"),
    log:
        "logs/calibration/calibrate.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        device=1 if REAL_DEVICE else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=constant("calibration"),
        compiled=compiled_option,
    shell:
        "rearrival calibrate --config {params.config_file:q} --out {output.profile:q}"
        " {params.compiled} > {log:q} 2>&1"
