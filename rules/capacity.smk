# Capacity (docs/DESIGN.md §17): the goodput of every
# configuration x fleet size x router of the study definition's capacity: section, and
# with its rate the cheapest fleet and its deployment, so a study can state a capacity
# prediction before it measures. Exploratory: run only when the section is present
# (final_targets), never registered by this rule.


rule capacity:
    input:
        pool=capacity_pool,
        profile=capacity_profile,
    output:
        out=directory(capacity_path()),
    log:
        "logs/capacity.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("capacity"),
        profile=capacity_profile_option,
    shell:
        "rearrival study capacity --config {params.config_file:q} --values {params.values}"
        " --pool {input.pool:q} {params.profile} --out {output.out:q} > {log:q} 2>&1"
