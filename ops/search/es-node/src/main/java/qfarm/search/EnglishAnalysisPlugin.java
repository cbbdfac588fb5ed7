package qfarm.search;

import java.util.Map;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.index.IndexSettings;
import org.elasticsearch.index.analysis.Analysis;
import org.elasticsearch.index.analysis.AnalyzerProvider;
import org.elasticsearch.index.analysis.AnalyzerScope;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The {@code english} analyzer. Elasticsearch ships it in its analysis-common module, which
 * is not published to Maven Central; this plugin registers the same Lucene analyzer
 * ({@link EnglishAnalyzer}: standard tokenizer, possessive filter, lowercase, English stop
 * words, Porter stemmer) under the same name, with its two settings, {@code stopwords} and
 * {@code stem_exclusion}. Usable by name in a mapping ({@code "analyzer": "english"}) or as
 * a type in index settings ({@code {"type": "english"}}).
 */
public final class EnglishAnalysisPlugin extends Plugin implements AnalysisPlugin {

    record EnglishProvider(String name, EnglishAnalyzer analyzer) implements AnalyzerProvider<EnglishAnalyzer> {
        static EnglishProvider of(Environment env, String name, Settings settings) {
            return new EnglishProvider(name, new EnglishAnalyzer(
                Analysis.parseStopWords(env, settings, EnglishAnalyzer.getDefaultStopSet()),
                Analysis.parseStemExclusion(settings, CharArraySet.EMPTY_SET)
            ));
        }

        @Override
        public AnalyzerScope scope() {
            return AnalyzerScope.INDEX;
        }

        @Override
        public EnglishAnalyzer get() {
            return analyzer;
        }
    }

    @Override
    public Map<String, AnalysisProvider<AnalyzerProvider<? extends Analyzer>>> getAnalyzers() {
        return Map.of("english", (IndexSettings indexSettings, Environment env, String name, Settings settings) ->
            EnglishProvider.of(env, name, settings));
    }
}
