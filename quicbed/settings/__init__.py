"""An arm's settings below the stacks that apply them: the QUIC transport parameters
(tparams), socket and host knobs (sockopts) and TCP options (tcpopts), each with its
vocabulary, its checks and how a host applies or shows it. Stacks (quicbed.servers) and
browsers declare what they take of them; specs (quicbed.spec) name them."""
