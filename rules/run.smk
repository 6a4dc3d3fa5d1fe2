# Stage 5: measurement. One job runs every condition of one replicate (one plan) in a
# seeded shuffled order, each on a fresh server; it refuses to start unless the study's
# preregistration is committed. Real-device runs (RBLN, vLLM) never overlap (`device`).
# A run that does not complete fails the job; its record stays under the failed log
# directory.


rule run_replicate:
    input:
        plans=rules.plans.output.plans,
        prereg=rules.preregister.output.record,
        selected=selected_input,
        compiled=compile_inputs,
    output:
        run=directory(run_path()),
    log:
        run="logs/runs/{study}/n{n}_r{rep}.log",
        failed="logs/runs/{study}/n{n}_r{rep}.failed",
    conda:
        "../envs/workflow.yaml"
    resources:
        device=1 if BACKEND.device else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=values("run"),
        selected=selected_option,
        compiled=compiled_option,
    # exec: the job's process is the verb itself, so a signal to the job (kill -TERM of its
    # pid) reaches the verb's handler, which stops its server (a shell would die alone)
    shell:
        "exec rearrival study run --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} --n {wildcards.n} --replicate {wildcards.rep}"
        " --plans {input.plans:q}"
        " --prereg {input.prereg:q} {params.selected} {params.compiled}"
        " --failed-runs {log.failed:q} --out {output.run:q} > {log.run:q} 2>&1"


rule injection:
    output:
        gaps=injection_path(),
    log:
        "logs/injection.log",
    conda:
        "../envs/workflow.yaml"
    resources:
        device=1 if BACKEND.device else 0,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=values("injection"),
    shell:
        "rearrival study injection --config {params.config_file:q} --values {params.values}"
        " --out {output.gaps:q} > {log:q} 2>&1"
