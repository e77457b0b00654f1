from lit_grpo.tasks.phyx.experiments import main

main()
