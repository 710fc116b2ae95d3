"""One chat conversation: its turns, its system prompt, the ``/`` commands, and the prompt ids of the next reply.

No model and no terminal here: `ChatSession.handle(line)` says what a typed line asks for (a `Step`), the caller
generates the reply from `prompt_ids(message)` and hands it back with `add_exchange`. Turns are
``{"role", "content"}`` dicts, the system turn first when one is set (see `prompt_formats.py` for the rendering).

Commands (a line starting with ``/``; ``//text`` sends ``/text`` as a message):
``/reset`` forgets the turns (the system prompt stays), ``/system TEXT`` sets the system prompt (``/system`` alone
shows it, ``/system -`` removes it), ``/help`` lists the commands, ``/quit`` (or ``/exit``) ends the chat.

Context: with ``context_length`` set, the oldest exchanges (a user turn and its reply) leave the prompt until the
prompt and ``reserve`` new tokens fit; ``dropped`` counts those that left for the last prompt. A message that does
not fit even alone is a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HELP = (
    "commands: /reset (forget the conversation), /system TEXT (set the system prompt; /system shows it, "
    "/system - removes it), /help, /quit (or Ctrl-D); Ctrl-C stops a reply; //text sends /text"
)


@dataclass(frozen=True)
class Step:
    """What a typed line asks for: ``reply`` (answer `text`), ``show`` (print `text`), ``quit`` or ``nothing``."""

    action: str
    text: str = ""


@dataclass
class ChatSession:
    """The conversation state of one chat (see the module docstring); `prompt_format` renders it to ids."""

    prompt_format: object
    system: str | None = None
    context_length: int | None = None
    reserve: int = 1
    turns: list[dict] = field(default_factory=list)
    dropped: int = 0

    def __post_init__(self):
        if self.system is not None and not self.prompt_format.multi_turn:
            raise ValueError(f"--system: the {self.prompt_format.name} has no system text; give a chat template "
                             "(--template chat or FILE.jinja) to use one")  # fmt: skip

    def handle(self, line: str) -> Step:
        """The step for one typed line (trailing newline ignored)."""
        line = line.rstrip("\r\n")
        if not line.strip():
            return Step("nothing")
        if line.startswith("//"):
            return Step("reply", line[1:])
        if not line.startswith("/"):
            return Step("reply", line)
        command, _, argument = line.partition(" ")
        argument = argument.strip()
        if command in ("/quit", "/exit", "/bye"):
            return Step("quit")
        if command == "/reset":
            self.turns.clear()
            return Step("show", "conversation cleared" + (" (the system prompt stays)" if self.system else ""))
        if command == "/system":
            return self._system(argument)
        if command == "/help":
            return Step("show", HELP)
        return Step("show", f"unknown command {command}; /help lists the commands")

    def _system(self, text: str) -> Step:
        if not self.prompt_format.multi_turn:
            return Step("show", f"the {self.prompt_format.name} has no system text; /system needs a chat template")
        if not text:
            return Step("show", f"system prompt: {self.system!r}" if self.system else "no system prompt set")
        self.system = None if text == "-" else text
        return Step("show", "system prompt removed" if self.system is None else "system prompt set")

    def conversation(self, message: str) -> list[dict]:
        """The turns the next reply answers: system, the kept history, then `message`."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns + [{"role": "user", "content": message}]

    def prompt_ids(self, message: str) -> list[int]:
        """Prompt ids for answering `message`, the oldest exchanges dropped until it fits the context."""
        self.dropped = 0
        while True:
            ids = self.prompt_format.prompt_ids(self.conversation(message))
            if self.context_length is None or len(ids) + self.reserve <= self.context_length:
                return ids
            if not self.turns:
                raise ValueError(f"the message makes a prompt of {len(ids)} tokens and the model's context is "
                                 f"{self.context_length}; send a shorter one")  # fmt: skip
            del self.turns[:2]  # the oldest user turn and its reply
            self.dropped += 1

    def add_exchange(self, message: str, reply: str) -> None:
        """Keep `message` and its `reply` as history (a format without history keeps nothing)."""
        if self.prompt_format.multi_turn:
            self.turns += [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]
