"""What runs on a testbed's three roles (server, bridge, client), without the testbed's
life: the interface every testbed gives its roles (quicbed.roles.interface), their CPU
accounting in control groups (cpu, cgroups) and their interfaces' offloads. The shapers
(quicbed.shapers) act on the roles; a testbed (quicbed.testbed) gives them and tears
down what the shapers left."""

#: the three roles, in the order every table and record lists them
ROLES = ("server", "client", "bridge")
