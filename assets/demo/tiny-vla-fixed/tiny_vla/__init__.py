"""tiny-vla: a small vision-language-action policy trained with flow matching."""

__version__ = "0.3.0"
