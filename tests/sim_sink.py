"""A node program for the simulator's tests (``python -m tests.sim_sink ROLE ...``): 'sink'
listens on port 9000 and logs each delivery of bytes; 'send IP N' connects there and writes
N bytes in one write. Simulation only: what repronet.sim.process hands a program, no more."""

PORT = 9000


class _Sink:
    def __init__(self, env):
        self.env = env

    def connection_made(self, conn):
        pass

    def data_received(self, conn, data):
        self.env.log.write('got', bytes=len(data))

    def connection_lost(self, conn, why):
        pass


class _Sender(_Sink):
    def __init__(self, env, nbytes):
        super().__init__(env)
        self.nbytes = nbytes

    def connection_made(self, conn):
        conn.send(b'x' * self.nbytes)


def simulate(env, argv):
    """Run the role argv names."""
    if argv[0] == 'sink':
        env.listen(PORT, lambda conn: _Sink(env))
    else:
        env.connect(argv[1], PORT, _Sender(env, int(argv[2])))
    env.ready()
