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
        shards=STUDY.search["shards"],
    shell:
        "rearrival search shard --config {params.config_file:q} --plans {input.plans:q}"
        " --shard {wildcards.shard} --shards {params.shards} --out {output:q} > {log:q} 2>&1"


rule search_merge:
    input:
        shards=expand(
            "results/search/shards/shard_{shard}.parquet",
            shard=range(STUDY.search["shards"]),
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
