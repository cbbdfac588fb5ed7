package qfarm.search;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.opensearch.Version;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * One single-node OpenSearch cluster in this JVM: HTTP on loopback, Lucene indices under
 * the data directory, the english analyzer of analysis-common.
 *
 * <p>Usage: {@code SearchNode --port 9200 --data DIR [--transport-port 9300] [-E key=value ...]}.
 * {@code -E} passes any node setting, as OpenSearch's own launcher does (the fault tests
 * shrink the search thread pool this way). The node runs until the process is signalled;
 * a shutdown hook closes it so its Lucene files are left consistent.
 */
public final class SearchNode {

    /** A node with the modules the farm's index template needs, loaded from the classpath. */
    static final class ClasspathNode extends Node {
        ClasspathNode(Settings settings, List<Class<? extends Plugin>> plugins) {
            super(
                InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), null, () -> "qfarm-search"),
                plugins,
                true
            );
        }
    }

    private SearchNode() {}

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
        Node node = new ClasspathNode(settings, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class));
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
        System.out.println("qfarm-search-node: OpenSearch " + Version.CURRENT + " on http://127.0.0.1:" + port
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
