"""What only tests, benchmarks and demos use: tiny offline models of every supported family
(:mod:`lit_grpo.testing.zoo`) and a scripted OpenAI-compatible judge server on loopback
(:mod:`lit_grpo.testing.loopback`). Training never imports this package."""
