# Configuration search (paper V-A; docs/DESIGN.md §12): candidates sharded into jobs so a
# cluster executor can spread them, merged into one ranking; the pick feeds later studies.
# One set of rules for every search: {search} is `search` for the top-level one
# (results/search/) or `study_search/<study>` for a study's own search block over its
# workload (results/study_search/<study>/), whose pick is that study's 'selected'.


rule search_plans:
    output:
        plans=directory(search_path("plans")),
    log:
        "logs/{search}/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=search_values,
        study=search_option,
    shell:
        "rearrival study search {params.study} --values {params.values} plans"
        " --config {params.config_file:q} --out {output.plans:q} > {log:q} 2>&1"


if ON_VLLM:

    # On vLLM (docs/DESIGN.md §15 "Search and advice") the search scores every
    # configuration exactly in one process: `rearrival search --substrate vllm` over
    # the plans above, its axes from the vllm section, the study's baseline its baseline.
    rule search_vllm:
        input:
            plans=rules.search_plans.output.plans,
            profile=profile_input,
        output:
            scores=search_path("scores.parquet"),
            selected=search_path("selected.json"),
            summary=search_path("summary.json"),
        log:
            "logs/{search}/search_vllm.log",
        conda:
            "../envs/workflow.yaml"
        params:
            config_file=CONFIG_FILE,
            values=search_values,
            study=search_option,
            axes=vllm_search_axes,
        shell:
            "rearrival study search {params.study} --values {params.values}"
            " --substrate vllm --config {params.config_file:q} --plans {input.plans:q}"
            " {params.axes} --profile {input.profile:q} --scores {output.scores:q}"
            " --selected {output.selected:q} --summary {output.summary:q} > {log:q} 2>&1"

else:

    rule search_shard:
        input:
            plans=rules.search_plans.output.plans,
            profile=profile_input,
        output:
            shard=search_path(shard_name()),
        log:
            "logs/{search}/shard_{shard}.log",
        conda:
            "../envs/workflow.yaml"
        params:
            config_file=CONFIG_FILE,
            values=search_values,
            study=search_option,
            shards=search_count,
            profile=profile_option,
        shell:
            "rearrival study search {params.study} --values {params.values} shard"
            " --config {params.config_file:q} --plans {input.plans:q} --shard {wildcards.shard}"
            " --shards {params.shards} {params.profile} --out {output.shard:q} > {log:q} 2>&1"

    rule search_merge:
        input:
            shards=search_shards,
            profile=profile_input,
        output:
            scores=search_path("scores.parquet"),
            selected=search_path("selected.json"),
            summary=search_path("summary.json"),
        log:
            "logs/{search}/merge.log",
        conda:
            "../envs/workflow.yaml"
        params:
            config_file=CONFIG_FILE,
            values=search_values,
            study=search_option,
            profile=profile_option,
        shell:
            "rearrival study search {params.study} --values {params.values} merge"
            " --config {params.config_file:q} --scores {output.scores:q}"
            " --selected {output.selected:q} --summary {output.summary:q} {params.profile}"
            " {input.shards:q} > {log:q} 2>&1"
