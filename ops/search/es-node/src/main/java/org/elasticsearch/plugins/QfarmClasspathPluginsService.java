package org.elasticsearch.plugins;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.elasticsearch.Build;
import org.elasticsearch.action.admin.cluster.node.info.PluginsAndModules;
import org.elasticsearch.env.Environment;

/**
 * qfarm's plugin service: the node's plugins are classes already on the JVM's class path
 * (Maven resolved their jars), not bundles unpacked under {@code modules/} or {@code plugins/}.
 *
 * <p>It lives in Elasticsearch's package because the record a loaded plugin is kept in, the
 * helpers that instantiate a plugin class, and the constructor of an empty plugin loader are
 * package-private there. Only members present in both 8.19 and 9.x are used.
 */
public final class QfarmClasspathPluginsService extends PluginsService {

    private final List<LoadedPlugin> loaded;

    public QfarmClasspathPluginsService(Environment environment, List<Class<? extends Plugin>> pluginClasses) {
        // An empty loader: the public factory would build module layers, which a server on the
        // class path (in the unnamed module) cannot describe.
        super(environment.settings(), environment.configDir(), new PluginsLoader(Set.of(), Set.of(), Map.of()));
        List<LoadedPlugin> plugins = new ArrayList<>();
        for (Class<? extends Plugin> pluginClass : pluginClasses) {
            Plugin instance = loadPlugin(pluginClass, environment.settings(), environment.configDir());
            plugins.add(new LoadedPlugin(describe(pluginClass), instance, pluginClass.getClassLoader()));
        }
        loadExtensions(plugins);
        this.loaded = List.copyOf(plugins);
    }

    /** The descriptor a bundle's plugin-descriptor.properties would give (its constructor differs between 8.x and 9.x). */
    private static PluginDescriptor describe(Class<? extends Plugin> pluginClass) {
        String properties = String.join(
            "\n",
            "name=" + pluginClass.getSimpleName(),
            "description=loaded from the class path by qfarm's launcher",
            "version=" + Build.current().version(),
            "elasticsearch.version=" + Build.current().version(),
            "java.version=" + Runtime.version().feature(),
            "classname=" + pluginClass.getName(),
            ""
        );
        try {
            return PluginDescriptor.readInternalDescriptorFromStream(new ByteArrayInputStream(properties.getBytes(StandardCharsets.UTF_8)));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    protected List<LoadedPlugin> plugins() {
        return loaded;
    }

    @Override
    public PluginsAndModules info() {
        return new PluginsAndModules(loaded.stream().map(p -> new PluginRuntimeInfo(p.descriptor())).toList(), Collections.emptyList());
    }
}
