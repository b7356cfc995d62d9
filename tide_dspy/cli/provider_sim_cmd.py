"""`tide provider-sim`: serve the four hosted providers' wire formats on this machine, with canned answers, until
Ctrl-C (tide_dspy.testing.provider_sim), and say how to point tide at it."""

from __future__ import annotations

import argparse

from tide_dspy.cli.argtypes import count


def register(subparsers: argparse._SubParsersAction) -> None:
    sim = subparsers.add_parser("provider-sim", help="serve the four hosted providers' wire formats on this machine "
                                                     "with canned answers, to try a hosted backbone without a key")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument("--port", type=count, default=8765, help="port to listen on (default 8765; 0: any free one)")
    sim.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import threading

    from tide_dspy.testing.provider_sim import ProviderSimulator, instructions

    try:
        sim = ProviderSimulator(host=args.host, port=args.port).__enter__()
    except OSError as exc:
        raise ValueError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); pass another --port") \
            from None
    try:
        print("\n".join(instructions(sim)), flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sim.__exit__(None, None, None)
    return 0
