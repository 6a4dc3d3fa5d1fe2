# Configuration search (paper V-A, SPEC 12): candidates sharded into jobs so a cluster
# executor can spread them, merged into one ranking; the pick feeds later studies.


rule search_plans:
    output:
        plans=directory(search_path("plans")),
    log:
        "logs/search/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=stage_values("search"),
    shell:
        "rearrival study search plans --config {params.config_file:q}"
        " --out {output.plans:q} > {log:q} 2>&1"


rule search_shard:
    input:
        plans=rules.search_plans.output.plans,
        profile=profile_input,
    output:
        shard=search_path(shard_name()),
    log:
        "logs/search/shard_{shard}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=stage_values("search"),
        shards=STUDY.search.shards,
        profile=profile_option,
    shell:
        "rearrival study search shard --config {params.config_file:q} --plans {input.plans:q}"
        " --shard {wildcards.shard} --shards {params.shards} {params.profile}"
        " --out {output.shard:q} > {log:q} 2>&1"


rule search_merge:
    input:
        shards=expand(rules.search_shard.output.shard, shard=range(STUDY.search.shards)),
        profile=profile_input,
    output:
        scores=search_path("scores.parquet"),
        selected=search_path("selected.json"),
        summary=search_path("summary.json"),
    log:
        "logs/search/merge.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=stage_values("search"),
        profile=profile_option,
    shell:
        "rearrival study search merge --config {params.config_file:q}"
        " --scores {output.scores:q} --selected {output.selected:q}"
        " --summary {output.summary:q} {params.profile} {input.shards:q} > {log:q} 2>&1"


# A study's own search (studies.<study>.search, e.g. over agent sessions): the same three
# stages on that study's workload; its pick is the study's 'selected' configuration.


rule study_search_plans:
    output:
        plans=directory(study_search_path("plans")),
    log:
        "logs/study_search/{study}/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
    shell:
        "rearrival study search --study {wildcards.study:q} plans"
        " --config {params.config_file:q}"
        " --out {output.plans:q} > {log:q} 2>&1"


rule study_search_shard:
    input:
        plans=rules.study_search_plans.output.plans,
        profile=profile_input,
    output:
        shard=study_search_path(shard_name()),
    log:
        "logs/study_search/{study}/shard_{shard}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
        shards=study_search_count,
        profile=profile_option,
    shell:
        "rearrival study search --study {wildcards.study:q} shard"
        " --config {params.config_file:q}"
        " --plans {input.plans:q} --shard {wildcards.shard} --shards {params.shards}"
        " {params.profile} --out {output.shard:q} > {log:q} 2>&1"


rule study_search_merge:
    input:
        shards=study_search_shards,
        profile=profile_input,
    output:
        scores=study_search_path("scores.parquet"),
        selected=study_search_path("selected.json"),
        summary=study_search_path("summary.json"),
    log:
        "logs/study_search/{study}/merge.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
        profile=profile_option,
    shell:
        "rearrival study search --study {wildcards.study:q} merge"
        " --config {params.config_file:q}"
        " --scores {output.scores:q} --selected {output.selected:q}"
        " --summary {output.summary:q} {params.profile} {input.shards:q} > {log:q} 2>&1"
