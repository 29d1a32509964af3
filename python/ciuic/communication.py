"""Point-to-point messages of Python objects between ranks.

    import ciuic.communication as comm
    c = comm.Communicator()                # over the default context (or a new one)
    c.send({"data": [1, 2, 3]}, dest=1)
    msg = c.recv(source=0)

`nodes`, when given, names the ranks (nodes[r] is rank r), so dest and
source may be names. MPICommunicator is a Communicator over backend="mpi".
"""

from .context import CiuicContext, Request, default_context


class Communicator:
    """Sends and receives picklable objects (sizes first, then the bytes;
    in order per (peer, tag)).

    context: the CiuicContext to use; default the default context, or a new
    CiuicContext(**context_args) when there is none."""

    def __init__(self, nodes=None, context=None, **context_args):
        if context is None:
            try:
                context = default_context() if not context_args else None
            except ValueError:
                context = None
            if context is None:
                context = CiuicContext(**context_args)
        self.context = context
        self.nodes = list(nodes) if nodes is not None else None
        if self.nodes is not None and len(self.nodes) != context.world_size:
            raise ValueError(f"nodes: {len(self.nodes)} names for {context.world_size} ranks")

    @property
    def rank(self):
        return self.context.rank

    @property
    def size(self):
        return self.context.world_size

    def _rank_of(self, who, what):
        if isinstance(who, str):
            if self.nodes is None or who not in self.nodes:
                raise ValueError(f"{what}={who!r}: not one of the nodes {self.nodes}")
            return self.nodes.index(who)
        return int(who)

    def send(self, message, dest, tag=0):
        self.context.send_object(message, self._rank_of(dest, "dest"), tag)

    def recv(self, source, tag=0):
        return self.context.recv_object(self._rank_of(source, "source"), tag)

    def send_async(self, message, dest, tag=0):
        """send, returning a Request at once (awaitable)."""
        return self.context.send_object_async(message, self._rank_of(dest, "dest"), tag)

    def recv_async(self, source, tag=0):
        """recv, returning a Request (awaitable) whose wait() returns the message."""
        return self.context.recv_object_async(self._rank_of(source, "source"), tag)


class MPICommunicator(Communicator):
    """A Communicator over an MPI job (backend="mpi": mpirun or mpi4py)."""

    def __init__(self, nodes=None, context=None, **context_args):
        if context is None and not context_args:
            context_args = {"backend": "mpi"}
        super().__init__(nodes, context, **context_args)


__all__ = ["Communicator", "MPICommunicator", "Request"]
