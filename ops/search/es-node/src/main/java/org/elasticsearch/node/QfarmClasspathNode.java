package org.elasticsearch.node;

import java.util.List;

import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsLoader;
import org.elasticsearch.plugins.PluginsService;
import org.elasticsearch.plugins.QfarmClasspathPluginsService;

/**
 * A node whose plugins are given as classes on the class path. Elasticsearch's public
 * constructor only takes plugin bundles from directories; the hook that chooses the plugin
 * service ({@link NodeServiceProvider}) is package-private, hence this package.
 */
public class QfarmClasspathNode extends Node {

    public QfarmClasspathNode(Environment environment, List<Class<? extends Plugin>> plugins) {
        super(NodeConstruction.prepareConstruction(environment, null, new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, PluginsLoader ignored) {
                return new QfarmClasspathPluginsService(env, plugins);
            }
        }, true));
    }
}
