// Package kafka is Cohort's Kafka-protocol listener: unmodified Kafka
// clients (franz-go, the Java client, librdkafka) run their consumer-group
// lifecycle against a Cohort cluster through it.
//
// It is a second front over the same engine and FSM as the gRPC API, with
// no state of its own: a Kafka request is decoded with franz-go's kmsg,
// turned into the engine's request, authorized by the gRPC method table
// (rpc.Authorize) and answered from the engine's result, with errcode's
// codes mapped to Kafka's (errors.go).
//
// Routing is Kafka's, not the gRPC front's forwarding: every node answers
// ApiVersions, Metadata, FindCoordinator and DescribeCluster; the Raft
// leader is the coordinator of every group and the controller, and a
// follower answers group and admin requests NOT_COORDINATOR or
// NOT_CONTROLLER, after which the client asks again who leads. Brokers are
// the servers of the Raft configuration that registered a Kafka address,
// each with a stable broker ID derived from its node ID (BrokerID).
//
// Cohort is a coordinator, not a log: Fetch answers every partition as
// empty at the offset asked for, ListOffsets answers 0, and Produce is not
// offered (ApiVersions does not list it), so a consumer runs its group
// lifecycle and commits whatever offsets its application decides.
//
// Kafka's newer group protocol (KIP-848: ConsumerGroupHeartbeat,
// ConsumerGroupDescribe) is served too: the FSM's consumer groups
// (fsm/consumer.go) reconcile members toward a server-side assignment;
// consumer.go here is its wire form.
//
// A group joined through this listener has the protocol type Kafka's
// client sent with a "kafka." prefix inside Cohort (kafka.consumer), so a
// gRPC member and a Kafka member can never share a group: the second kind
// to join is refused INCONSISTENT_GROUP_PROTOCOL.
package kafka
