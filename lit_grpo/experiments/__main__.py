from lit_grpo.experiments import main

main()
