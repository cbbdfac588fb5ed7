package qfarm.search;

import java.util.List;

import org.apache.lucene.util.Version;
import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.ClusterState;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * {@code GET /} and {@code HEAD /}: the node's name, cluster and version, in the shape the
 * server's rest-root module answers (clients' {@code info()} and {@code ping()} call it). That
 * module is not published to Maven Central, so without this the root answers 405.
 */
final class RootInfoHandler extends BaseRestHandler {

    private final ClusterService clusterService;

    RootInfoHandler(ClusterService clusterService) {
        this.clusterService = clusterService;
    }

    @Override
    public String getName() {
        return "qfarm_root_info";
    }

    @Override
    public List<Route> routes() {
        return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
    }

    @Override
    protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
        return channel -> {
            ClusterState state = clusterService.state();
            Build build = Build.current();
            XContentBuilder body = channel.newBuilder();
            body.startObject()
                .field("name", clusterService.getNodeName())
                .field("cluster_name", clusterService.getClusterName().value())
                .field("cluster_uuid", state.metadata().clusterUUID())
                .startObject("version")
                .field("number", build.qualifiedVersion())
                .field("build_flavor", build.flavor())
                .field("build_type", build.type().displayName())
                .field("build_hash", build.hash())
                .field("build_date", build.date())
                .field("build_snapshot", build.isSnapshot())
                .field("lucene_version", Version.LATEST.toString())
                .field("minimum_wire_compatibility_version", build.minWireCompatVersion())
                .field("minimum_index_compatibility_version", build.minIndexCompatVersion())
                .endObject()
                .field("tagline", "You Know, for Search")
                .endObject();
            channel.sendResponse(new RestResponse(RestStatus.OK, body));
        };
    }
}
