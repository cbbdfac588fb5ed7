package qfarm.search;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.elasticsearch.Build;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.Node;
import org.elasticsearch.node.QfarmClasspathNode;
import org.elasticsearch.rest.RestController;
import org.elasticsearch.transport.netty4.Netty4Plugin;

/**
 * One single-node Elasticsearch cluster in this JVM: HTTP on loopback, Lucene indices under
 * the data directory, the english analyzer. The server and the netty4 transport are
 * Elasticsearch's own jars from Maven Central; the modules Elastic does not publish there
 * (analysis-common, rest-root, x-pack, painless, mapper-extras, ...) are absent, so this is the
 * server core plus HTTP, with {@link EnglishAnalysisPlugin} for the {@code english} analyzer
 * and {@link RootInfoHandler} for {@code GET /}. Builds against 8.19 (Java 17) and 9.x (Java 21+).
 *
 * <p>Usage: {@code ElasticsearchNode --port 9200 --data DIR [--transport-port 9300] [-E key=value ...]},
 * the command line of {@code SearchNode} (the OpenSearch launcher). The node runs until the
 * process is signalled; a shutdown hook closes it so its Lucene files are left consistent.
 */
public final class ElasticsearchNode {

    private ElasticsearchNode() {}

    public static void main(String[] args) throws Exception {
        String port = "9200";
        String transportPort = "9300-9399";
        Path data = null;
        Settings.Builder extra = Settings.builder();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (arg) {
                case "--port" -> { port = require(arg, value); i++; }
                case "--transport-port" -> { transportPort = require(arg, value); i++; }
                case "--data" -> { data = Path.of(require(arg, value)); i++; }
                case "-E" -> {
                    String kv = require(arg, value);
                    int eq = kv.indexOf('=');
                    if (eq < 1) {
                        fail("-E expects key=value, got '" + kv + "'");
                    }
                    extra.put(kv.substring(0, eq), kv.substring(eq + 1));
                    i++;
                }
                default -> fail("unknown argument '" + arg + "' (expected --port, --data, --transport-port, -E key=value)");
            }
        }
        if (data == null) {
            fail("--data DIR is required: the directory that holds the node's indices");
        }
        Path home = data.toAbsolutePath();
        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", "qfarm-search")
            .put("node.name", "qfarm-search")
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", port)
            .put("transport.port", transportPort)
            // A crowded test disk must not turn the farm's indices read-only mid-test.
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put(extra.build())
            .build();
        // Elasticsearch's own logging facade forwards to log4j (configured by log4j2.properties
        // on the class path) only once this has run; the server's launcher does it at boot.
        LogConfigurator.configureESLogging();
        Node node = new QfarmClasspathNode(
            InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), null, () -> "qfarm-search"),
            List.of(Netty4Plugin.class, EnglishAnalysisPlugin.class)
        );
        node.injector().getInstance(RestController.class)
            .registerHandler(new RootInfoHandler(node.injector().getInstance(ClusterService.class)));
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                System.err.println("qfarm-search-node: close failed: " + e);
            } finally {
                closed.countDown();
            }
        }, "qfarm-search-node-shutdown"));
        node.start();
        System.out.println("qfarm-search-node: Elasticsearch " + Build.current().version() + " on http://127.0.0.1:" + port
            + " (data " + home + ", heap " + (Runtime.getRuntime().maxMemory() >> 20) + " MiB)");
        System.out.flush();
        closed.await();
    }

    private static String require(String flag, String value) {
        if (value == null) {
            fail(flag + " needs a value");
        }
        return value;
    }

    private static void fail(String message) {
        System.err.println("qfarm-search-node: " + message);
        System.exit(2);
    }
}
