# Configuration search (paper V-A, SPEC 12): candidates sharded into jobs so a cluster
# executor can spread them, merged into one ranking; the pick feeds later studies.


rule search_plans:
    output:
        directory("results/search/plans"),
    log:
        "logs/search/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=constant("search"),
    shell:
        "rearrival search plans --config {params.config_file:q} --out {output:q} > {log:q} 2>&1"


rule search_shard:
    input:
        plans="results/search/plans",
        profile=profile_input,
    output:
        "results/search/shards/shard_{shard}.parquet",
    log:
        "logs/search/shard_{shard}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=constant("search"),
        shards=STUDY.search.shards,
    shell:
        "rearrival search shard --config {params.config_file:q} --plans {input.plans:q}"
        " --shard {wildcards.shard} --shards {params.shards} --out {output:q} > {log:q} 2>&1"


rule search_merge:
    input:
        shards=expand(
            "results/search/shards/shard_{shard}.parquet",
            shard=range(STUDY.search.shards),
        ),
        profile=profile_input,
    output:
        scores="results/search/scores.parquet",
        selected="results/search/selected.json",
        summary="results/search/summary.json",
    log:
        "logs/search/merge.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=constant("search"),
        out_dir=lambda wildcards, output: str(Path(output.scores).parent),
    shell:
        "rearrival search merge --config {params.config_file:q} --out-dir {params.out_dir:q}"
        " {input.shards:q} > {log:q} 2>&1"


# A study's own search (studies.<study>.search, e.g. over agent sessions): the same three
# stages on that study's workload; its pick is the study's 'selected' configuration.


rule study_search_plans:
    output:
        directory("results/study_search/{study}/plans"),
    log:
        "logs/study_search/{study}/plans.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
    shell:
        "rearrival search --study {wildcards.study:q} plans --config {params.config_file:q}"
        " --out {output:q} > {log:q} 2>&1"


rule study_search_shard:
    input:
        plans="results/study_search/{study}/plans",
        profile=profile_input,
    output:
        "results/study_search/{study}/shards/shard_{shard}.parquet",
    log:
        "logs/study_search/{study}/shard_{shard}.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
        shards=study_search_count,
    shell:
        "rearrival search --study {wildcards.study:q} shard --config {params.config_file:q}"
        " --plans {input.plans:q} --shard {wildcards.shard} --shards {params.shards}"
        " --out {output:q} > {log:q} 2>&1"


rule study_search_merge:
    input:
        shards=study_search_shards,
        profile=profile_input,
    output:
        scores="results/study_search/{study}/scores.parquet",
        selected="results/study_search/{study}/selected.json",
        summary="results/study_search/{study}/summary.json",
    log:
        "logs/study_search/{study}/merge.log",
    conda:
        "../envs/workflow.yaml"
    params:
        config_file=CONFIG_FILE,
        values=values("search"),
        out_dir=lambda wildcards, output: str(Path(output.scores).parent),
    shell:
        "rearrival search --study {wildcards.study:q} merge --config {params.config_file:q}"
        " --out-dir {params.out_dir:q} {input.shards:q} > {log:q} 2>&1"
