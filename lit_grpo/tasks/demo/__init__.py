"""The offline demo: a tiny Granite-Vision-shaped VLM built on the spot (:mod:`lit_grpo.tasks.demo.embedded`), so a
demo config trains with nothing downloaded. Importing it registers the option group ``embedded``
(``model.init_args.policy.embedded``: build that model into ``name_or_path`` when the folder has none)."""

from lit_grpo.tasks.demo import embedded  # noqa: F401  (registers the embedded option group)
