# Stage 4 (backends that compile, e.g. rbln): compile every configuration of a study
# with optimum-rbln into content-addressed artifacts; an existing artifact is reused.


rule compile:
    input:
        selected=selected_input,
    output:
        record=compile_path(),
    log:
        "logs/compile/{study}.log",
    conda:
        "../envs/rbln.yaml"
    resources:
        device=1,
        gres=DEVICE_GRES,
    params:
        config_file=CONFIG_FILE,
        values=values("compile"),
        selected=selected_option,
    shell:
        "rearrival study compile --config {params.config_file:q} --study {wildcards.study:q}"
        " --values {params.values} {params.selected} --out {output.record:q} > {log:q} 2>&1"
