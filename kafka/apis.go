package kafka

import "github.com/twmb/franz-go/pkg/kmsg"

// versions is the range of one API's versions the listener serves.
type versions struct{ min, max int16 }

// apis are the APIs served and their versions: every version from the
// oldest a current client may send to the newest whose fields this
// listener acts on. A version past max is refused (the connection closes,
// as Kafka does) after ApiVersions told the client not to send it.
//
// Left out on purpose: Produce (Cohort keeps no log), SaslHandshake v0
// (its raw SASL framing; v1 wraps the exchange in SaslAuthenticate), the
// transaction and ACL APIs.
var apis = map[int16]versions{
	kmsg.ApiVersions.Int16():      {0, 4},
	kmsg.SASLHandshake.Int16():    {1, 1},
	kmsg.SASLAuthenticate.Int16(): {0, 2},
	kmsg.Metadata.Int16():         {0, 13},
	kmsg.FindCoordinator.Int16():  {0, 6},
	kmsg.DescribeCluster.Int16():  {0, 2},
	kmsg.JoinGroup.Int16():        {0, 9},
	kmsg.SyncGroup.Int16():        {0, 5},
	kmsg.Heartbeat.Int16():        {0, 4},
	kmsg.LeaveGroup.Int16():       {0, 5},
	kmsg.OffsetCommit.Int16():     {0, 10},
	kmsg.OffsetFetch.Int16():      {0, 10},
	kmsg.OffsetDelete.Int16():     {0, 0},
	kmsg.DescribeGroups.Int16():   {0, 6},
	kmsg.ListGroups.Int16():       {0, 5},
	kmsg.DeleteGroups.Int16():     {0, 3},
	kmsg.CreateTopics.Int16():     {0, 7},
	kmsg.DeleteTopics.Int16():     {0, 6},
	kmsg.CreatePartitions.Int16(): {0, 3},
	kmsg.Fetch.Int16():            {4, 12},
	kmsg.ListOffsets.Int16():      {1, 7},

	kmsg.ConsumerGroupHeartbeat.Int16(): {0, 1},
	kmsg.ConsumerGroupDescribe.Int16():  {0, 1},
}

// apiKeys is the ApiVersions answer's list, sorted by key.
func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(apis))
	for key := range kmsg.MaxKey + 1 {
		if v, ok := apis[int16(key)]; ok {
			k := kmsg.NewApiVersionsResponseApiKey()
			k.ApiKey, k.MinVersion, k.MaxVersion = int16(key), v.min, v.max
			out = append(out, k)
		}
	}
	return out
}

func apiVersions(*kmsg.ApiVersionsRequest) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.ApiKeys = apiKeys()
	return resp
}

// unsupportedAPIVersions answers an ApiVersions of a version past ours:
// version 0, UNSUPPORTED_VERSION and our versions, so that the client
// retries with one we serve.
func unsupportedAPIVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = codeUnsupportedVersion
	resp.ApiKeys = apiKeys()
	return resp
}
